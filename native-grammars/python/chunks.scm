; Chunk definitions for Python, in the tags.scm capture convention:
; @definition.<kind> marks the node of a chunk, @name its symbol.

(decorated_definition
  definition: (class_definition name: (identifier) @name)) @definition.class

(decorated_definition
  definition: (function_definition name: (identifier) @name)) @definition.function

(class_definition name: (identifier) @name) @definition.class

(function_definition name: (identifier) @name) @definition.function
