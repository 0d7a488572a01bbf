; Chunk definitions for Zig (tags.scm capture convention).
; Zig types are values: `const Name = struct { ... };` is a struct named Name.
; Functions inside a struct/enum/union become methods.

(variable_declaration . (identifier) @name (struct_declaration)) @definition.struct
(variable_declaration . (identifier) @name (enum_declaration)) @definition.enum
(variable_declaration . (identifier) @name (union_declaration)) @definition.union
(variable_declaration . (identifier) @name (opaque_declaration)) @definition.struct
(variable_declaration . (identifier) @name (error_set_declaration)) @definition.type

(function_declaration name: (identifier) @name) @definition.function

; test "description" { ... } / test name { ... } / test { ... }
(test_declaration [(string (string_content) @name) (identifier) @name]?) @definition.function

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc
