; Chunk definitions for C++ (tags.scm capture convention).
;
; A function's name sits at the bottom of its declarator: `f()`, `*f()`,
; `&f()`, `S::f()`, `ns::S::f()`, `~S()`, `operator==()`, `operator bool()`.
; Definitions written inside a class body become methods through the
; chunker; out-of-line definitions (`bool S::f() {...}`) are methods here.
; A `template <...>` line belongs to the definition it introduces, so each
; pattern comes once more wrapped in a template_declaration (the wrapper is
; kept, the inner duplicate of the same kind and name is dropped).

; --- GoogleTest cases: `TEST(Suite, Name) {...}` is named by its test (this
; pattern comes first: on a tie the earlier pattern names the definition) ---

(function_definition
  declarator: (function_declarator
    declarator: (identifier) @_macro
    parameters: (parameter_list
      (parameter_declaration)
      .
      (parameter_declaration type: (type_identifier) @name) .))
  (#match? @_macro "^(TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)$")) @definition.function

; --- functions with a plain name (free functions, inline methods) ---

(function_definition
  declarator: [
    (function_declarator
      declarator: [(identifier) (field_identifier) (destructor_name) (operator_name) (template_function)] @name)
    (pointer_declarator declarator: (function_declarator
      declarator: [(identifier) (field_identifier) (operator_name) (template_function)] @name))
    (pointer_declarator declarator: (pointer_declarator declarator: (function_declarator
      declarator: [(identifier) (field_identifier) (operator_name) (template_function)] @name)))
    (reference_declarator (function_declarator
      declarator: [(identifier) (field_identifier) (operator_name) (template_function)] @name))
    (operator_cast) @name
  ]) @definition.function

(template_declaration
  (function_definition
    declarator: [
      (function_declarator
        declarator: [(identifier) (field_identifier) (destructor_name) (operator_name) (template_function)] @name)
      (pointer_declarator declarator: (function_declarator
        declarator: [(identifier) (field_identifier) (operator_name) (template_function)] @name))
      (reference_declarator (function_declarator
        declarator: [(identifier) (field_identifier) (operator_name) (template_function)] @name))
      (operator_cast) @name
    ])) @definition.function

; --- out-of-line member definitions: `Type S::f(...) {...}` ---

(function_definition
  declarator: [
    (function_declarator declarator: (qualified_identifier
      name: [(identifier) (field_identifier) (destructor_name) (operator_name) (operator_cast) (template_function)] @name))
    (function_declarator declarator: (qualified_identifier name: (qualified_identifier
      name: [(identifier) (field_identifier) (destructor_name) (operator_name) (operator_cast) (template_function)] @name)))
    (pointer_declarator declarator: (function_declarator declarator: (qualified_identifier
      name: [(identifier) (field_identifier) (operator_name) (template_function)] @name)))
    (reference_declarator (function_declarator declarator: (qualified_identifier
      name: [(identifier) (field_identifier) (operator_name) (template_function)] @name)))
    (qualified_identifier name: (operator_cast) @name)
  ]) @definition.method

(template_declaration
  (function_definition
    declarator: [
      (function_declarator declarator: (qualified_identifier
        name: [(identifier) (field_identifier) (destructor_name) (operator_name) (operator_cast) (template_function)] @name))
      (function_declarator declarator: (qualified_identifier name: (qualified_identifier
        name: [(identifier) (field_identifier) (destructor_name) (operator_name) (operator_cast) (template_function)] @name)))
      (pointer_declarator declarator: (function_declarator declarator: (qualified_identifier
        name: [(identifier) (field_identifier) (operator_name) (template_function)] @name)))
      (reference_declarator (function_declarator declarator: (qualified_identifier
        name: [(identifier) (field_identifier) (operator_name) (template_function)] @name)))
    ])) @definition.method

; --- types ---

; `struct Outer<T>::Inner {...}` is named Inner.
(template_declaration (class_specifier name: [(type_identifier) @name (template_type) @name (qualified_identifier name: (_) @name)] body: (_))) @definition.class
(template_declaration (struct_specifier name: [(type_identifier) @name (template_type) @name (qualified_identifier name: (_) @name)] body: (_))) @definition.struct
(template_declaration (union_specifier name: [(type_identifier) @name (template_type) @name (qualified_identifier name: (_) @name)] body: (_))) @definition.union
(template_declaration (concept_definition name: (_) @name)) @definition.type

(class_specifier name: [(type_identifier) @name (template_type) @name (qualified_identifier name: (_) @name)] body: (_)) @definition.class
(struct_specifier name: [(type_identifier) @name (template_type) @name (qualified_identifier name: (_) @name)] body: (_)) @definition.struct
(union_specifier name: [(type_identifier) @name (template_type) @name (qualified_identifier name: (_) @name)] body: (_)) @definition.union
(enum_specifier name: [(type_identifier) @name (qualified_identifier name: (_) @name)] body: (_)) @definition.enum
; Type aliases at file or namespace level (member typedefs stay in their
; class's chunks rather than each being a one-line chunk).
(translation_unit [(alias_declaration name: (_) @name) (template_declaration (alias_declaration name: (_) @name)) (type_definition declarator: (type_identifier) @name)] @definition.type)
(declaration_list [(alias_declaration name: (_) @name) (template_declaration (alias_declaration name: (_) @name)) (type_definition declarator: (type_identifier) @name)] @definition.type)
(preproc_if [(alias_declaration name: (_) @name) (template_declaration (alias_declaration name: (_) @name)) (type_definition declarator: (type_identifier) @name)] @definition.type)
(preproc_ifdef [(alias_declaration name: (_) @name) (template_declaration (alias_declaration name: (_) @name)) (type_definition declarator: (type_identifier) @name)] @definition.type)
(preproc_else [(alias_declaration name: (_) @name) (template_declaration (alias_declaration name: (_) @name)) (type_definition declarator: (type_identifier) @name)] @definition.type)
(preproc_elif [(alias_declaration name: (_) @name) (template_declaration (alias_declaration name: (_) @name)) (type_definition declarator: (type_identifier) @name)] @definition.type)
(concept_definition name: (_) @name) @definition.type

(namespace_definition name: (_) @name body: (_)) @definition.namespace

(preproc_function_def name: (identifier) @name) @definition.macro

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc
