; Chunk definitions for Go (tags.scm capture convention).

(function_declaration name: (identifier) @name) @definition.function
(method_declaration name: (field_identifier) @name) @definition.method
(type_declaration (type_spec name: (type_identifier) @name type: (struct_type))) @definition.struct
(type_declaration (type_spec name: (type_identifier) @name type: (interface_type))) @definition.interface
(type_declaration (type_spec name: (type_identifier) @name)) @definition.type
(type_declaration (type_alias name: (type_identifier) @name)) @definition.type

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc
