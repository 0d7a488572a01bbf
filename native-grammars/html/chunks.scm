; Chunk definitions for HTML (tags.scm capture convention).
; Sections are elements with an `id` (named by it) and the landmark elements
; <header> <nav> <main> <section> <article> <aside> <footer> <form> (named by
; their tag); inline <script> and <style> blocks are chunks of their own.
; Patterns stay shallow: sibling sequences over element children are
; quadratic in tree-sitter's matcher and took minutes on large pages.

(element
  (start_tag
    (attribute
      (attribute_name) @_attr (#match? @_attr "^[iI][dD]$")
      [(attribute_value) @name (quoted_attribute_value (attribute_value) @name)]))) @definition.section

(element
  (start_tag (tag_name) @name
    (#any-of? @name "section" "article" "aside" "header" "main" "nav" "footer" "form"))) @definition.section

(script_element (start_tag (tag_name) @name)) @definition.module

(style_element (start_tag (tag_name) @name)) @definition.module
