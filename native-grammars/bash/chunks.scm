; Chunk definitions for Bash (tags.scm capture convention).
; Covers both `name() { ... }` and `function name { ... }`.

(function_definition name: (word) @name) @definition.function
