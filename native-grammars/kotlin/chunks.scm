; Chunk definitions for Kotlin (tree-sitter-kotlin-ng; tags.scm capture
; convention). Classes, interfaces and enum classes are all
; class_declaration: the `interface` keyword and an enum body tell them apart
; (the first pattern that matches a node decides its kind). Annotations
; live inside the declaration's modifiers; KDoc comments are attached by the
; chunker.

(class_declaration "interface" name: (identifier) @name) @definition.interface
(class_declaration (modifiers (class_modifier) @_enum) "class" name: (identifier) @name
  (#eq? @_enum "enum")) @definition.enum
(class_declaration (modifiers)? @_mods "class" name: (identifier) @name
  (#not-match? @_mods "(^|\\s)enum(\\s|$)")) @definition.class

(object_declaration name: (identifier) @name) @definition.object
(companion_object name: (identifier) @name) @definition.object
(companion_object "companion" @name !name) @definition.object

(function_declaration name: (identifier) @name) @definition.function
(secondary_constructor "constructor" @name) @definition.method

; Properties whose getter or setter has a block body.
(property_declaration
  (variable_declaration (identifier) @name)
  [(getter (function_body (block))) (setter (function_body (block)))]) @definition.function

(type_alias type: (identifier) @name) @definition.type

; Top-level properties and constants (`const val MAX_DATE = ...`,
; `val CoroutineContext.isActive get() = ...`); block-bodied ones are
; functions above.
(source_file (property_declaration (variable_declaration (identifier) @name)) @definition.constant)

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
[(line_comment) (block_comment)] @doc

; At the top level the grammar reads an annotation with arguments on its own
; line (`@Throws(IOException::class)` above `fun read()`) as an annotated
; expression, a statement of its own: it is the declaration's annotation.
(source_file
  (annotated_expression (annotation) (parenthesized_expression)) @attribute)
