; Code graph references for PHP (tags.scm convention, started from
; tree-sitter-php's queries/tags.scm; captures as in python/tags.scm).

(function_call_expression function: (name) @name) @reference.call
(function_call_expression function: (qualified_name (name) @name)) @reference.call
(member_call_expression object: (_) @receiver name: (name) @name) @reference.call
(nullsafe_member_call_expression object: (_) @receiver name: (name) @name) @reference.call
(scoped_call_expression scope: (_) @receiver name: (name) @name) @reference.call

(object_creation_expression (name) @name) @reference.constructor
(object_creation_expression (qualified_name (name) @name)) @reference.constructor

(base_clause [(name) @name (qualified_name (name) @name)]) @reference.inherits
(class_interface_clause [(name) @name (qualified_name (name) @name)]) @reference.implements
(use_declaration [(name) @name (qualified_name (name) @name)]) @reference.implements

(namespace_use_clause [(name) (qualified_name)] @module alias: (name)? @alias) @reference.import
