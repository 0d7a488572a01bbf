; Code graph references for Java (tags.scm convention, started from
; tree-sitter-java's queries/tags.scm; captures as in python/tags.scm).

(method_invocation !object name: (identifier) @name) @reference.call
(method_invocation object: (_) @receiver name: (identifier) @name) @reference.call
(method_reference . (_) @receiver (identifier) @name .) @reference.call

(object_creation_expression type: (type_identifier) @name) @reference.constructor
(object_creation_expression type: (generic_type (type_identifier) @name)) @reference.constructor
(object_creation_expression type: (scoped_type_identifier (_) @receiver (type_identifier) @name .)) @reference.constructor

(superclass (type_identifier) @name) @reference.inherits
(superclass (generic_type (type_identifier) @name)) @reference.inherits
(super_interfaces (type_list (type_identifier) @name)) @reference.implements
(super_interfaces (type_list (generic_type (type_identifier) @name))) @reference.implements
(extends_interfaces (type_list (type_identifier) @name)) @reference.inherits

(import_declaration (scoped_identifier) @module) @reference.import
