; Chunk definitions for JSON (tags.scm capture convention).
; Each top-level key whose value is an object or an array is a chunk named
; by the key; scalar keys stay together in the surrounding module chunks.

(document
  (object
    (pair
      key: (string (string_content) @name)
      value: [(object) (array)]) @definition.module))
