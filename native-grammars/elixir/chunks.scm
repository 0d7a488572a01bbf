; Chunk definitions for Elixir (tags.scm capture convention).
;
; Every definition is a macro call (`def name(args) do ... end`), matched by
; the call target. The name of a def is the identifier in its head, which
; takes one of three shapes: `def name`, `def name(args)`,
; `def name(args) when guard`.
; A `@doc` attribute right above a def is its doc (see the end), and joins
; its chunk, as do `@spec`, `@impl` and `@deprecated` between them.

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

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc

; `@doc "..."` and `@typedoc` are the doc of the definition right below;
; `@moduledoc`, the first statement of a module's body, of the module.
(unary_operator
  operator: "@"
  operand: (call target: (identifier) @_attr)
  (#any-of? @_attr "doc" "typedoc")) @doc

; `@spec`, `@impl` and `@deprecated` are the attributes of the def below them
; (`@attribute`: attached like a decorator, not its doc).
(unary_operator
  operator: "@"
  operand: (call target: (identifier) @_attr)
  (#any-of? @_attr "spec" "impl" "deprecated")) @attribute
(call
  target: (identifier) @_kw
  (do_block . (unary_operator operator: "@" operand: (call target: (identifier) @_attr)) @doc)
  (#eq? @_kw "defmodule")
  (#eq? @_attr "moduledoc")) @definition.module
