; Code graph references for Go (tags.scm convention, started from
; tree-sitter-go's queries/tags.scm; captures as in python/tags.scm). A
; method's receiver type is its @container, its receiver variable its @self.

(method_declaration
  receiver: (parameter_list (parameter_declaration
    name: (identifier)? @self
    type: [(type_identifier) @container
           (pointer_type (type_identifier) @container)
           (generic_type type: (type_identifier) @container)
           (pointer_type (generic_type type: (type_identifier) @container))]))
  name: (field_identifier) @name) @definition.method

(call_expression function: (identifier) @name) @reference.call
(call_expression function: (selector_expression operand: (_) @receiver field: (field_identifier) @name)) @reference.call



(composite_literal type: (type_identifier) @name) @reference.constructor
(composite_literal type: (generic_type type: (type_identifier) @name)) @reference.constructor
(composite_literal type: (qualified_type package: (package_identifier) @receiver name: (type_identifier) @name)) @reference.constructor

(struct_type (field_declaration_list (field_declaration !name type: [(type_identifier) @name (pointer_type (type_identifier) @name)]))) @reference.inherits
(interface_type (type_elem (type_identifier) @name)) @reference.inherits

(import_spec name: (package_identifier)? @alias path: (_) @module) @reference.import
