; Chunk definitions for Haskell (tags.scm capture convention).
;
; A function's type signature and its equations are sibling nodes, and a
; query names single nodes, so a signature (with the Haddock comment above
; it) is a chunk of its own, named like the function; each equation group
; node is another. Definitions inside `where`/`let` belong to their
; enclosing function's chunk; inside `class`/`instance` bodies they are
; methods.

(header module: (module) @name) @definition.module

; Operators are named without their parentheses: `(<+>)` is `<+>`.
(signature name: [(variable) @name (prefix_id (_) @name)]) @definition.function
(function name: [(variable) @name (prefix_id (_) @name)]) @definition.function
(function (infix operator: [(operator) @name (infix_id (_) @name)])) @definition.function
(bind name: [(variable) @name (prefix_id (_) @name)]) @definition.function

(data_type name: (_) @name) @definition.type
(newtype name: (_) @name) @definition.type
(type_synonym name: (_) @name) @definition.type
(type_family name: (_) @name) @definition.type
(data_family name: (_) @name) @definition.type

; A type class is a trait; an instance is an impl named after the instance
; type (`instance Show (Tree a)` is named Tree), as Rust names impls.
(class name: (_) @name) @definition.trait
(instance
  patterns: (type_patterns . [
    [(name) (qualified)] @name
    (apply . [(name) (qualified)] @name)
    (apply . (apply . [(name) (qualified)] @name))
    (apply . (apply . (apply . [(name) (qualified)] @name)))
    (parens [(name) (qualified)] @name)
    (parens (apply . [(name) (qualified)] @name))
    (parens (apply . (apply . [(name) (qualified)] @name)))
    (parens (apply . (apply . (apply . [(name) (qualified)] @name))))
    (variable) @name
    (list) @name
    (tuple) @name
    (unit) @name
    (prefix_list) @name
    (prefix_tuple) @name
  ])) @definition.impl

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
[(comment) (haddock)] @doc
