; Chunk definitions for Swift (tags.scm capture convention).
;
; class, struct, enum, actor and extension are all class_declaration, told
; apart by their declaration_kind keyword; an extension is an impl named
; after the extended type. Attributes (`@MainActor`) are part of the
; declaration; doc comments are attached by the chunker.

(class_declaration declaration_kind: "class" name: (_) @name) @definition.class
(class_declaration declaration_kind: "actor" name: (_) @name) @definition.class
(class_declaration declaration_kind: "struct" name: (_) @name) @definition.struct
(class_declaration declaration_kind: "enum" name: (_) @name) @definition.enum
(class_declaration declaration_kind: "extension" name: (_) @name) @definition.impl
(protocol_declaration name: (_) @name) @definition.interface

; The function name is the first `name:` child (the grammar also labels the
; return type `name:`), right after `func`; it may be an operator token
; (`static func == (...)`). A wildcard here also keeps the query fast to
; compile: typed alternatives on function_declaration cost ~300 ms.
(function_declaration "func" . name: _ @name) @definition.function
(protocol_function_declaration "func" . name: _ @name) @definition.function
(init_declaration name: "init" @name) @definition.method
(deinit_declaration "deinit" @name) @definition.method
(subscript_declaration "subscript" @name) @definition.method

; Computed properties (`var body: some View { ... }`) behave like methods.
(property_declaration
  name: (pattern bound_identifier: (simple_identifier) @name)
  computed_value: (computed_property)) @definition.function

(typealias_declaration name: (type_identifier) @name) @definition.type

; Top-level constants and variables (`let mediaTypes: [String: String] = [...]`);
; computed ones are functions above.
(source_file (property_declaration
  name: (pattern bound_identifier: (simple_identifier) @name)) @definition.constant)

; `macro Controller() = #externalMacro(...)` declarations.
(macro_declaration (simple_identifier) @name) @definition.macro

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
[(comment) (multiline_comment)] @doc
