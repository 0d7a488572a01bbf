; Code graph references for Python, in the tree-sitter tags.scm convention
; (started from tree-sitter-python's queries/tags.scm). Definitions come from
; chunks.scm. Captures: @reference.<kind> (call, constructor, inherits,
; implements, import) with @name, @receiver (the object of a method call),
; @module and @alias (imports); @definition.<kind> with @container or @self
; adds to a definition of chunks.scm.

(call function: (identifier) @name) @reference.call
(call function: (attribute object: (_) @receiver attribute: (identifier) @name)) @reference.call

(class_definition superclasses: (argument_list (identifier) @name)) @reference.inherits
(class_definition superclasses: (argument_list (attribute object: (_) @receiver attribute: (identifier) @name))) @reference.inherits

(import_statement name: (dotted_name) @module) @reference.import
(import_statement name: (aliased_import name: (dotted_name) @module alias: (identifier) @alias)) @reference.import
(import_from_statement module_name: (_) @module name: (dotted_name) @name) @reference.import
(import_from_statement module_name: (_) @module name: (aliased_import name: (dotted_name) @name alias: (identifier) @alias)) @reference.import
