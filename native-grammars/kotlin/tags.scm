; Code graph references for Kotlin (tags.scm convention; captures as in
; python/tags.scm). A call of a class name is a constructor call, decided when
; the call is resolved.

(call_expression . (identifier) @name) @reference.call
(call_expression . (navigation_expression (_) @receiver (identifier) @name .)) @reference.call

(delegation_specifier (constructor_invocation (user_type (identifier) @name .))) @reference.inherits
(delegation_specifier (user_type (identifier) @name .)) @reference.implements

(import (qualified_identifier) @module . (identifier)? @alias) @reference.import
