; Chunk definitions for OCaml implementation files (.ml; tags.scm capture
; convention). Doc comments `(** ... *)` before a definition are attached by
; the chunker.

; Every named `let` at file or structure level is a chunk (a local
; `let ... in` belongs to its enclosing definition). Point-free definitions
; (`let to_dyn = Dyn.opaque`) are functions too, so a `let` is a function
; unless it has no parameters and its body is a literal or a data constructor, which makes it a
; constant. `let rec f ... and g ...` is one chunk named after the first
; binding. A let matching two patterns at the same node takes the kind of the
; earlier one, so the constant patterns come first.
(compilation_unit (value_definition . (let_binding pattern: (value_name) @name (parameter))) @definition.function)
(compilation_unit (value_definition . (let_binding pattern: (value_name) @name body: [(number) (signed_number) (string) (quoted_string) (character) (boolean) (list_expression) (array_expression) (record_expression) (tuple_expression) (constructor_path)])) @definition.constant)
(compilation_unit (value_definition . (let_binding pattern: (value_name) @name body: (_))) @definition.function)
(compilation_unit (value_definition . (let_binding pattern: (parenthesized_operator (_) @name))) @definition.function)
(structure (value_definition . (let_binding pattern: (value_name) @name (parameter))) @definition.function)
(structure (value_definition . (let_binding pattern: (value_name) @name body: [(number) (signed_number) (string) (quoted_string) (character) (boolean) (list_expression) (array_expression) (record_expression) (tuple_expression) (constructor_path)])) @definition.constant)
(structure (value_definition . (let_binding pattern: (value_name) @name body: (_))) @definition.function)
(structure (value_definition . (let_binding pattern: (parenthesized_operator (_) @name))) @definition.function)

(external (value_name) @name) @definition.function
(value_specification (value_name) @name) @definition.function

(type_definition . (type_binding name: (_) @name)) @definition.type

(module_definition . (module_binding (module_name) @name)) @definition.module
(module_type_definition (module_type_name) @name) @definition.interface

(class_definition . (class_binding (class_name) @name)) @definition.class
(class_type_definition . (class_type_binding (class_type_name) @name)) @definition.interface
(method_definition (method_name) @name) @definition.method

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc
