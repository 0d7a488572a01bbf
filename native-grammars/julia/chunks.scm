; Chunk definitions for Julia (tags.scm capture convention).
; Docstrings are separate string_literal nodes before a definition: `@doc`
; captures them (see the end), and the chunker attaches them as comments.

(module_definition name: (_) @name) @definition.module

; struct Name ... / struct Name{T} <: Super ... (mutable or not)
(struct_definition
  (type_head [
    (identifier) @name
    (parametrized_type_expression . (identifier) @name)
    (binary_expression . [
      (identifier) @name
      (parametrized_type_expression . (identifier) @name)])])) @definition.struct

; abstract type Name <: Super end / primitive type Name 8 end
(abstract_definition
  (type_head [
    (identifier) @name
    (parametrized_type_expression . (identifier) @name)
    (binary_expression . [
      (identifier) @name
      (parametrized_type_expression . (identifier) @name)])])) @definition.type

(primitive_definition
  (type_head [
    (identifier) @name
    (binary_expression . (identifier) @name)])) @definition.type

; function name end / function name(args) ... end, with optional ::T and where
(function_definition (signature (identifier) @name)) @definition.function

(function_definition
  (signature [
    (call_expression . [(identifier) (field_expression)] @name)
    (call_expression . (parametrized_type_expression . (identifier) @name))
    (typed_expression . (call_expression . [(identifier) (field_expression)] @name))
    (where_expression . (call_expression . [(identifier) (field_expression)] @name))
    (where_expression . (call_expression . (parametrized_type_expression . (identifier) @name)))
    (where_expression . (typed_expression . (call_expression . [(identifier) (field_expression)] @name)))])) @definition.function

; name(args) = expr, with optional ::T and where
(assignment . [
  (call_expression . [(identifier) (field_expression)] @name)
  (call_expression . (parametrized_type_expression . (identifier) @name))
  (typed_expression . (call_expression . [(identifier) (field_expression)] @name))
  (where_expression . (call_expression . [(identifier) (field_expression)] @name))
  (where_expression . (call_expression . (parametrized_type_expression . (identifier) @name)))
  (where_expression . (typed_expression . (call_expression . [(identifier) (field_expression)] @name)))]
  (operator)) @definition.function

(macro_definition (signature (call_expression . (identifier) @name))) @definition.macro

; @enum Name a b c
(macrocall_expression
  (macro_identifier (identifier) @_m (#eq? @_m "enum"))
  (macro_argument_list . [(identifier) @name (typed_expression . (identifier) @name)])) @definition.enum

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
[(line_comment) (block_comment)] @doc
; A docstring is a string right above the definition, at the top level or in a module.
(source_file (string_literal) @doc)
(module_definition (string_literal) @doc)
