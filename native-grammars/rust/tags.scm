; Code graph references for Rust (tags.scm convention, started from
; tree-sitter-rust's queries/tags.scm; captures as in python/tags.scm).

(call_expression function: (identifier) @name) @reference.call
(call_expression function: (field_expression value: (_) @receiver field: (field_identifier) @name)) @reference.call
(call_expression function: (scoped_identifier path: (_) @receiver name: (identifier) @name)) @reference.call
(call_expression function: (generic_function function: (identifier) @name)) @reference.call
(call_expression function: (generic_function function: (field_expression value: (_) @receiver field: (field_identifier) @name))) @reference.call
(call_expression function: (generic_function function: (scoped_identifier path: (_) @receiver name: (identifier) @name))) @reference.call
(macro_invocation macro: (identifier) @name) @reference.call
; Calls inside a macro's arguments (`assert_eq!(parse(x), ...)`), which the
; grammar keeps as plain tokens: a name right before a parenthesised group.
(token_tree (identifier) @name . (token_tree . "(")) @reference.call
(token_tree (identifier) @receiver . "." . (identifier) @name . (token_tree . "(")) @reference.call
(token_tree (identifier) @receiver . "::" . (identifier) @name . (token_tree . "(")) @reference.call

(struct_expression name: (type_identifier) @name) @reference.constructor
(struct_expression name: (scoped_type_identifier path: (_) @receiver name: (type_identifier) @name)) @reference.constructor

(impl_item trait: (type_identifier) @name) @reference.implements
(impl_item trait: (scoped_type_identifier name: (type_identifier) @name)) @reference.implements
(impl_item trait: (generic_type type: (type_identifier) @name)) @reference.implements
(trait_item bounds: (trait_bounds (type_identifier) @name)) @reference.inherits

(use_declaration argument: (scoped_identifier path: (_) @module name: (identifier) @name)) @reference.import
(use_declaration argument: (use_as_clause path: (scoped_identifier path: (_) @module name: (identifier) @name) alias: (identifier) @alias)) @reference.import
(use_declaration argument: (scoped_use_list path: (_) @module list: (use_list (identifier) @name))) @reference.import
(use_declaration argument: (scoped_use_list path: (_) @module list: (use_list (use_as_clause path: (identifier) @name alias: (identifier) @alias)))) @reference.import
