; Chunk definitions for Dart (tags.scm capture convention).
;
; Class members are wrapped in member_declaration, which holds their
; annotations (`@override`); it is the chunk node so that doc comments before
; it attach. A named constructor `Item.fromJson(...)` is named `fromJson`
; (the name right before the parameters).

(class_declaration name: (identifier) @name) @definition.class
(mixin_declaration name: (identifier) @name) @definition.trait
(enum_declaration name: (identifier) @name) @definition.enum
(extension_type_declaration name: [(identifier) @name (extension_type_name (identifier) @name)]) @definition.class
(extension_declaration name: (identifier) @name) @definition.impl
(extension_declaration !name class: (_) @name) @definition.impl

(type_alias . (type_identifier) @name) @definition.type

(function_declaration signature: (function_signature name: (identifier) @name)) @definition.function
(getter_declaration signature: (getter_signature name: (identifier) @name)) @definition.function
(setter_declaration signature: (setter_signature name: (identifier) @name)) @definition.function
(external_function_declaration signature: (function_signature name: (identifier) @name)) @definition.function
(external_getter_declaration signature: (getter_signature name: (identifier) @name)) @definition.function
(external_setter_declaration signature: (setter_signature name: (identifier) @name)) @definition.function

(member_declaration
  [
    (method_declaration signature: (method_signature [
      (function_signature name: (identifier) @name)
      (getter_signature name: (identifier) @name)
      (setter_signature name: (identifier) @name)
      (operator_signature operator: _ @name)
      (constructor_signature name: _ @name . parameters: (_))
      (factory_constructor_signature name: _ @name . parameters: (_))
    ]))
    (declaration [
      (function_signature name: (identifier) @name)
      (getter_signature name: (identifier) @name)
      (setter_signature name: (identifier) @name)
      (operator_signature operator: _ @name)
      (constructor_signature name: _ @name . parameters: (_))
      (constant_constructor_signature name: _ @name . parameters: (_))
      (factory_constructor_signature name: _ @name . parameters: (_))
      (redirecting_factory_constructor_signature name: _ @name . parameters: (_))
    ])
  ]) @definition.method

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
[(comment) (documentation_comment)] @doc
