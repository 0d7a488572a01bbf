; Chunk definitions for Bash (tags.scm capture convention).
; Covers both `name() { ... }` and `function name { ... }`.

(function_definition name: (word) @name) @definition.function

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc
