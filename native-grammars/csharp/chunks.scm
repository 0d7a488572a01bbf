; Chunk definitions for C# (tags.scm capture convention).
;
; Attributes (`[Serializable]`) are part of the declaration node; doc
; comments (`///`) are attached by the chunker. A file-scoped namespace
; (`namespace X;`) has no body to chunk, so it stays with the usings.

(namespace_declaration name: (_) @name) @definition.namespace

(class_declaration name: (identifier) @name) @definition.class
(record_declaration name: (identifier) @name) @definition.class
(struct_declaration name: (identifier) @name) @definition.struct
(interface_declaration name: (identifier) @name) @definition.interface
(enum_declaration name: (identifier) @name) @definition.enum
(delegate_declaration name: (identifier) @name) @definition.type

(method_declaration name: (identifier) @name) @definition.method
(constructor_declaration name: (identifier) @name) @definition.method
(destructor_declaration name: (identifier) @name) @definition.method
(operator_declaration operator: _ @name) @definition.method
; A conversion operator is named by its target type, which would pose as
; that type (a JToken class has dozens of `implicit operator JToken`), so it
; is left unnamed.
(conversion_operator_declaration) @definition.method

; Properties and indexers only when an accessor has a block body (logic worth
; its own chunk); auto-properties stay with their class.
(property_declaration
  name: (identifier) @name
  accessors: (accessor_list (accessor_declaration body: (block)))) @definition.method
(indexer_declaration
  "this" @name
  accessors: (accessor_list (accessor_declaration body: (block)))) @definition.method
; An expression-bodied property or indexer (`public bool IsEmpty => count == 0;`)
; computes its value, as a getter with a body does.
(property_declaration name: (identifier) @name value: (arrow_expression_clause)) @definition.method
(indexer_declaration "this" @name value: (arrow_expression_clause)) @definition.method

; Top-level statements (C# 9 programs) may declare local functions.
(compilation_unit (global_statement (local_function_statement name: (identifier) @name) @definition.function))

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc
