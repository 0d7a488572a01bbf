; Code graph references for Swift (tags.scm convention, started from
; tree-sitter-swift's queries/tags.scm; captures as in python/tags.scm).

(call_expression . (simple_identifier) @name (call_suffix)) @reference.call
(call_expression . (navigation_expression target: (_) @receiver suffix: (navigation_suffix suffix: (simple_identifier) @name)) (call_suffix)) @reference.call
(constructor_expression constructed_type: (user_type (type_identifier) @name .)) @reference.constructor

(inheritance_specifier inherits_from: (user_type (type_identifier) @name .)) @reference.inherits

(import_declaration (identifier) @module) @reference.import
