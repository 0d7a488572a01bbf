; Code graph references for C++ (tags.scm convention, started from
; tree-sitter-cpp's queries/tags.scm; captures as in python/tags.scm).
; Out-of-class method definitions (`void Foo::bar()`) get Foo as @container.

(function_definition
  declarator: (function_declarator
    declarator: (qualified_identifier scope: [(namespace_identifier) (template_type)] @container name: (_) @name))) @definition.method

(call_expression function: (identifier) @name) @reference.call
(call_expression function: (field_expression argument: (_) @receiver field: (field_identifier) @name)) @reference.call
(call_expression function: (qualified_identifier scope: (_) @receiver name: (identifier) @name)) @reference.call
(call_expression function: (template_function name: (identifier) @name)) @reference.call

(new_expression type: (type_identifier) @name) @reference.constructor
(new_expression type: (qualified_identifier scope: (_) @receiver name: (type_identifier) @name)) @reference.constructor

(base_class_clause (type_identifier) @name) @reference.inherits
(base_class_clause (qualified_identifier name: (type_identifier) @name)) @reference.inherits
(base_class_clause (template_type name: (type_identifier) @name)) @reference.inherits

(preproc_include path: (string_literal) @module) @reference.import
