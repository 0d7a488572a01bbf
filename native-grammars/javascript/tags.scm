; Code graph references for JavaScript (tags.scm convention, started from
; tree-sitter-javascript's queries/tags.scm; captures as in python/tags.scm).

(call_expression function: (identifier) @name) @reference.call
(call_expression function: (member_expression object: (_) @receiver property: (property_identifier) @name)) @reference.call

(new_expression constructor: (identifier) @name) @reference.constructor
(new_expression constructor: (member_expression object: (_) @receiver property: (property_identifier) @name)) @reference.constructor

(class_heritage (identifier) @name) @reference.inherits
(class_heritage (member_expression object: (_) @receiver property: (property_identifier) @name)) @reference.inherits

(import_statement (import_clause (identifier) @name) source: (string (string_fragment) @module)) @reference.import
(import_statement (import_clause (named_imports (import_specifier name: (identifier) @name !alias))) source: (string (string_fragment) @module)) @reference.import
(import_statement (import_clause (named_imports (import_specifier name: (identifier) @name alias: (identifier) @alias))) source: (string (string_fragment) @module)) @reference.import
(import_statement (import_clause (namespace_import (identifier) @alias)) source: (string (string_fragment) @module)) @reference.import
(variable_declarator
  name: (identifier) @alias
  value: (call_expression function: (identifier) @_require arguments: (arguments . (string (string_fragment) @module)))
  (#eq? @_require "require")) @reference.import
(variable_declarator
  name: (object_pattern (shorthand_property_identifier_pattern) @name)
  value: (call_expression function: (identifier) @_require arguments: (arguments . (string (string_fragment) @module)))
  (#eq? @_require "require")) @reference.import
