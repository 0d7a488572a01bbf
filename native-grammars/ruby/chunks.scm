; Chunk definitions for Ruby (tags.scm capture convention).
; Comments directly above a definition are attached by the chunker.
; `class << self` is not a chunk of its own: the methods in it are chunks of
; the enclosing class, and the `class << self` line stays in the class's
; chunk.

(class name: [(constant) @name (scope_resolution name: (_) @name)]) @definition.class
(module name: [(constant) @name (scope_resolution name: (_) @name)]) @definition.module

; `Point = Struct.new(:x, :y) do ... end`, `Class.new(Base) do`, `Data.define`.
(assignment
  left: (constant) @name
  right: (call
    receiver: (constant) @_receiver
    method: (identifier) @_method
    block: (do_block))
  (#any-of? @_receiver "Struct" "Class" "Data")
  (#any-of? @_method "new" "define")) @definition.class

; A def at file level is a function; anywhere else (class, module, block) a
; method.
(program (method name: (_) @name) @definition.function)
(method name: (_) @name) @definition.method
(singleton_method name: (_) @name) @definition.method

; RSpec / minitest-spec: example groups hold examples.
(call
  method: (identifier) @_group
  arguments: (argument_list . [(string (string_content) @name) (constant) @name (scope_resolution) @name])
  block: (do_block)
  (#any-of? @_group "describe" "context" "feature" "shared_examples" "shared_context" "shared_examples_for")) @definition.module
(call
  method: (identifier) @_example
  arguments: (argument_list . (string (string_content) @name))
  block: (do_block)
  (#any-of? @_example "it" "specify" "scenario" "example" "test")) @definition.function

; Routes of Sinatra-style apps (Sinatra, Padrino, Roda, Grape): `get '/users'
; do ... end` is the handler of that path.
(call
  method: (identifier) @_verb
  arguments: (argument_list . (string (string_content) @name))
  block: (do_block)
  (#any-of? @_verb "get" "post" "put" "patch" "delete" "head" "options" "link" "unlink")) @definition.function

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc
