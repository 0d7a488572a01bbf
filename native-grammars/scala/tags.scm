; Code graph references for Scala (tags.scm convention, started from
; tree-sitter-scala's queries/tags.scm; captures as in python/tags.scm).

(call_expression function: (identifier) @name) @reference.call
(call_expression function: (field_expression value: (_) @receiver field: (identifier) @name)) @reference.call
(call_expression function: (generic_function function: (identifier) @name)) @reference.call
(call_expression function: (generic_function function: (field_expression value: (_) @receiver field: (identifier) @name))) @reference.call

(instance_expression (type_identifier) @name) @reference.constructor
(instance_expression (generic_type type: (type_identifier) @name)) @reference.constructor

(extends_clause type: (type_identifier) @name) @reference.inherits
(extends_clause type: (generic_type type: (type_identifier) @name)) @reference.inherits
