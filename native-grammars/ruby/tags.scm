; Code graph references for Ruby (tags.scm convention, started from
; tree-sitter-ruby's queries/tags.scm; captures as in python/tags.scm).

(call !receiver method: (identifier) @name) @reference.call
(call receiver: (_) @receiver method: (identifier) @name
  (#not-eq? @name "new")) @reference.call
(call receiver: (constant) @name method: (identifier) @_new
  (#eq? @_new "new")) @reference.constructor
(call receiver: (scope_resolution scope: (_) @receiver name: (constant) @name) method: (identifier) @_new
  (#eq? @_new "new")) @reference.constructor

(superclass (constant) @name) @reference.inherits
(superclass (scope_resolution scope: (_) @receiver name: (constant) @name)) @reference.inherits
(call !receiver method: (identifier) @_mixin arguments: (argument_list (constant) @name)
  (#any-of? @_mixin "include" "extend" "prepend")) @reference.implements

(call !receiver method: (identifier) @_require arguments: (argument_list . (string (string_content) @module))
  (#any-of? @_require "require" "require_relative")) @reference.import
