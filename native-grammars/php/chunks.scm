; Chunk definitions for PHP (tags.scm capture convention).
; Attributes (`#[Route(...)]`) are part of the declaration; docblocks are
; attached by the chunker. `namespace X;` without braces has no body to
; chunk, so it stays with the use statements.

(namespace_definition name: (_) @name body: (_)) @definition.namespace

(class_declaration name: (name) @name) @definition.class
(interface_declaration name: (name) @name) @definition.interface
(trait_declaration name: (name) @name) @definition.trait
(enum_declaration name: (name) @name) @definition.enum

(method_declaration name: (name) @name) @definition.method
(function_definition name: (name) @name) @definition.function

; Top-level closures: `$handler = function (...) {...};`
(program (expression_statement (assignment_expression
  left: (variable_name (name) @name)
  right: [(anonymous_function) (arrow_function)])) @definition.function)

; A closure a top-level call is given is named by the string right before it
; (`Route::get('/users', function () {...})`, `$app->get('/health', fn () =>
; ...)`), but for a hook or listener: an event's name is not its handler's.
(program (expression_statement [
  (function_call_expression function: (name) @_fn
    arguments: (arguments (argument [(string (string_content) @name) (encapsed_string (string_content) @name)]) . (argument [(anonymous_function) (arrow_function)])))
  (scoped_call_expression name: (name) @_fn
    arguments: (arguments (argument [(string (string_content) @name) (encapsed_string (string_content) @name)]) . (argument [(anonymous_function) (arrow_function)])))
  (member_call_expression name: (name) @_fn
    arguments: (arguments (argument [(string (string_content) @name) (encapsed_string (string_content) @name)]) . (argument [(anonymous_function) (arrow_function)])))
  ]) @definition.function
  (#not-any-of? @_fn "add_action" "add_filter" "on" "listen" "subscribe" "addEventListener"))

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc
