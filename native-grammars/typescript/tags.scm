; Code graph references for TypeScript (tags.scm convention, started from
; tree-sitter-typescript's and tree-sitter-javascript's queries/tags.scm;
; captures as in python/tags.scm). Class heritage has its own nodes here, so
; the JavaScript patterns are repeated rather than inherited.

(call_expression function: (identifier) @name) @reference.call
(call_expression function: (member_expression object: (_) @receiver property: (property_identifier) @name)) @reference.call

(new_expression constructor: (identifier) @name) @reference.constructor
(new_expression constructor: (member_expression object: (_) @receiver property: (property_identifier) @name)) @reference.constructor

(extends_clause value: (identifier) @name) @reference.inherits
(extends_clause value: (member_expression object: (_) @receiver property: (property_identifier) @name)) @reference.inherits
(extends_type_clause type: (type_identifier) @name) @reference.inherits
(implements_clause (type_identifier) @name) @reference.implements
(implements_clause (generic_type name: (type_identifier) @name)) @reference.implements

(import_statement (import_clause (identifier) @name) source: (string (string_fragment) @module)) @reference.import
(import_statement (import_clause (named_imports (import_specifier name: (identifier) @name !alias))) source: (string (string_fragment) @module)) @reference.import
(import_statement (import_clause (named_imports (import_specifier name: (identifier) @name alias: (identifier) @alias))) source: (string (string_fragment) @module)) @reference.import
(import_statement (import_clause (namespace_import (identifier) @alias)) source: (string (string_fragment) @module)) @reference.import
(variable_declarator
  name: (identifier) @alias
  value: (call_expression function: (identifier) @_require arguments: (arguments . (string (string_fragment) @module)))
  (#eq? @_require "require")) @reference.import
