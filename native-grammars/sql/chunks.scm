; Chunk definitions for SQL (tags.scm capture convention).
; Each CREATE statement is a chunk named by the object it creates, as
; written (`billing.invoices`). The definition node is the `statement`, so
; that the comment above it is attached. Kinds: table -> struct, view and
; type -> type (enum for AS ENUM), function and trigger -> function,
; index -> object, sequence -> constant, schema -> namespace.
; The grammar has no CREATE PROCEDURE (those parse as errors).

(statement (create_table (object_reference) @name)) @definition.struct

(statement (create_view (object_reference) @name)) @definition.type
(statement (create_materialized_view (object_reference) @name)) @definition.type

(statement (create_function (keyword_function) . (object_reference) @name)) @definition.function

(statement (create_trigger (keyword_trigger) . (object_reference) @name)) @definition.function
(statement (create_trigger (keyword_exists) . (object_reference) @name)) @definition.function

(statement (create_type (object_reference) @name (keyword_enum))) @definition.enum
(statement (create_type (object_reference) @name [(column_definitions) (keyword_range)])) @definition.type

; CREATE INDEX name ON table (...); an unnamed index is named by its table.
(statement (create_index column: (_) @name)) @definition.object
(statement (create_index !column (object_reference) @name)) @definition.object

(statement (create_sequence (object_reference) @name)) @definition.constant

(statement (create_schema (identifier) @name)) @definition.namespace

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc
