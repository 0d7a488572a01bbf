; Code graph references for C (tags.scm convention, started from
; tree-sitter-c's queries/tags.scm; captures as in python/tags.scm).

(call_expression function: (identifier) @name) @reference.call
(call_expression function: (field_expression argument: (_) @receiver field: (field_identifier) @name)) @reference.call

(preproc_include path: (string_literal) @module) @reference.import
