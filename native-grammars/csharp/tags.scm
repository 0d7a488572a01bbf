; Code graph references for C# (tags.scm convention, started from
; tree-sitter-c-sharp's queries/tags.scm; captures as in python/tags.scm).

(invocation_expression function: (identifier) @name) @reference.call
(invocation_expression function: (generic_name (identifier) @name)) @reference.call
(invocation_expression function: (member_access_expression expression: (_) @receiver name: (identifier) @name)) @reference.call
(invocation_expression function: (member_access_expression expression: (_) @receiver name: (generic_name (identifier) @name))) @reference.call

(object_creation_expression type: (identifier) @name) @reference.constructor
(object_creation_expression type: (generic_name (identifier) @name)) @reference.constructor
(object_creation_expression type: (qualified_name qualifier: (_) @receiver name: (identifier) @name)) @reference.constructor

(base_list (identifier) @name) @reference.inherits
(base_list (generic_name (identifier) @name)) @reference.inherits
(base_list (qualified_name name: (identifier) @name)) @reference.inherits

(using_directive name: (identifier) @alias (qualified_name) @module) @reference.import
(using_directive !name [(qualified_name) (identifier)] @module) @reference.import
