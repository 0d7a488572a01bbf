; Chunk definitions for TOML (tags.scm capture convention).
; Every [table] and [[array of tables]] element is a chunk named by its
; header key as written (`dependencies`, `package.metadata.docs.rs`, `bin`).
; The grammar puts a comment that precedes a header inside the previous
; table, so such comments stay with the table above.

(table [(bare_key) (dotted_key) (quoted_key)] @name) @definition.module
(table_array_element [(bare_key) (dotted_key) (quoted_key)] @name) @definition.module
