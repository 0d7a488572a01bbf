; Chunk definitions for Python, in the tags.scm capture convention:
; @definition.<kind> marks the node of a chunk, @name its symbol.

(decorated_definition
  definition: (class_definition name: (identifier) @name)) @definition.class

(decorated_definition
  definition: (function_definition name: (identifier) @name)) @definition.function

(class_definition name: (identifier) @name) @definition.class

(function_definition name: (identifier) @name) @definition.function

; Module-level constants (`DEFAULT_WIDTH = 80`, `RenderableType = Union[...]`)
; and `type` aliases.
(module (expression_statement (assignment left: (identifier) @name)) @definition.constant)
(module (type_alias_statement (type (identifier) @name)) @definition.type)
; A constant's docstring: the string right below it (PEP 257's attribute
; docstrings, as Sphinx reads them).
(module (expression_statement (assignment left: (identifier) @name)) @definition.constant
  .
  (expression_statement (string) @doc))

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc

; A module's docstring: about the module, not code (captured alone, it is
; nobody's doc unless a definition follows it directly).
(module . (expression_statement (string) @doc))

; A docstring: the first statement of the body, a string. Captured with its
; definition (these patterns come last: the named ones above give the kind).
(function_definition body: (block . (expression_statement (string) @doc))) @definition.function
(class_definition body: (block . (expression_statement (string) @doc))) @definition.class
(decorated_definition
  definition: (function_definition body: (block . (expression_statement (string) @doc)))) @definition.function
(decorated_definition
  definition: (class_definition body: (block . (expression_statement (string) @doc)))) @definition.class
