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
