; Chunk definitions for Lua (tags.scm capture convention).
; Names keep their table path (`M.parse`, `Parser:next`), as written.

; function name() / function M.name() / local function name()
(function_declaration
  name: [(identifier) (dot_index_expression)] @name) @definition.function

; function Class:name()
(function_declaration
  name: (method_index_expression) @name) @definition.method

; local name = function() ... end
(variable_declaration
  (assignment_statement
    (variable_list . name: [(identifier) (dot_index_expression)] @name)
    (expression_list . value: (function_definition)))) @definition.function

; name = function() ... end / M.name = function() ... end
(assignment_statement
  (variable_list . name: [(identifier) (dot_index_expression)] @name)
  (expression_list . value: (function_definition))) @definition.function

; { name = function() ... end }
(field
  name: (identifier) @name
  value: (function_definition)) @definition.function

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc
