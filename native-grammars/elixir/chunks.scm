; Chunk definitions for Elixir (tags.scm capture convention).
;
; Every definition is a macro call (`def name(args) do ... end`), matched by
; the call target. The name of a def is the identifier in its head, which
; takes one of three shapes: `def name`, `def name(args)`,
; `def name(args) when guard`.
; Module attributes (`@doc`, `@spec`) are ordinary nodes, not comments, so
; they are not attached to the def that follows; `#` comments are.

(call
  target: (identifier) @_kw
  (arguments . (alias) @name)
  (#eq? @_kw "defmodule")) @definition.module

(call
  target: (identifier) @_kw
  (arguments . (alias) @name)
  (#eq? @_kw "defprotocol")) @definition.interface

; `defimpl Proto, for: Type` is an impl for Type (as in Rust); `defimpl Proto`
; inside the type's own module is named after the protocol.
(call
  target: (identifier) @_kw
  (arguments (alias) (keywords (pair key: (keyword) @_for value: (_) @name)))
  (#eq? @_kw "defimpl")
  (#match? @_for "^for:")) @definition.impl
(call
  target: (identifier) @_kw
  (arguments . (alias) @name .)
  (#eq? @_kw "defimpl")) @definition.impl

(call
  target: (identifier) @_kw
  (arguments
    . [
      (identifier) @name
      (call target: (identifier) @name)
      (binary_operator left: (call target: (identifier) @name) operator: "when")
      (binary_operator left: (identifier) @name operator: "when")
    ])
  (#any-of? @_kw "def" "defp" "defdelegate" "defguard" "defguardp" "defn" "defnp")) @definition.function

(call
  target: (identifier) @_kw
  (arguments
    . [
      (identifier) @name
      (call target: (identifier) @name)
      (binary_operator left: (call target: (identifier) @name) operator: "when")
    ])
  (#any-of? @_kw "defmacro" "defmacrop")) @definition.macro

; ExUnit: `describe "..." do` groups `test "..." do` cases.
(call
  target: (identifier) @_kw
  (arguments . (string (quoted_content) @name))
  (do_block)
  (#eq? @_kw "describe")) @definition.module
(call
  target: (identifier) @_kw
  (arguments . (string (quoted_content) @name))
  (do_block)
  (#eq? @_kw "test")) @definition.function
