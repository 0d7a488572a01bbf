; Chunk definitions for CSS (tags.scm capture convention).
; A rule set is a chunk named by its selector list (`.btn, .btn:visited`);
; its kind is `class`, as in ctags. Conditional group rules (@media,
; @supports, @scope, and at-rules with a block such as @font-face, @layer,
; @container) are sections whose rule sets are their members, named by their
; condition or, failing that, their at-keyword. @keyframes are objects named
; by the animation.

(rule_set (selectors) @name) @definition.class

(media_statement . (_) @name (block)) @definition.section
(supports_statement . (_) @name (block)) @definition.section
(scope_statement . (_) @name (block)) @definition.section
(at_rule (at_keyword) @name (block)) @definition.section

(keyframes_statement (keyframes_name) @name) @definition.object
