; Chunk definitions for Scala 2 and 3 (tags.scm capture convention).
; Annotations are part of the definition node; Scaladoc comments are
; attached by the chunker. `def this(...)` is an auxiliary constructor, named
; `this`.

(package_clause name: (_) @name body: (_)) @definition.namespace
(package_object name: (_) @name) @definition.object

(class_definition name: (_) @name) @definition.class
(trait_definition name: (_) @name) @definition.trait
(object_definition name: (_) @name) @definition.object
(enum_definition name: (_) @name) @definition.enum

(function_definition name: (_) @name) @definition.function
(function_declaration name: (_) @name) @definition.function

(type_definition name: (_) @name) @definition.type

; `extension (x: T) ...` adds methods to T: an impl named after T.
(extension_definition
  parameters: (parameters . (parameter type: [
    (type_identifier) @name
    (stable_type_identifier) @name
    (generic_type type: [(type_identifier) (stable_type_identifier)] @name)
  ]))) @definition.impl

; Named givens (`given intOrd: Ordering[Int] with ...`) are instances.
(given_definition name: (_) @name) @definition.object

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
[(comment) (block_comment)] @doc
