; Chunk definitions for R (tags.scm capture convention).

; name <- function(...) ...  (also =, <<-, and `obj$name <- function`)
(binary_operator
  lhs: [(identifier) (string) (extract_operator)] @name
  operator: ["<-" "=" "<<-"]
  rhs: (function_definition)) @definition.function

; function(...) ... -> name
(binary_operator
  lhs: (function_definition)
  operator: ["->" "->>"]
  rhs: (identifier) @name) @definition.function

; Name <- R6Class("Name", public = list(method = function() ...)) and
; Name <- setRefClass("Name", methods = list(...)): a class whose list
; members that are functions become its methods.
(binary_operator
  lhs: (identifier) @name
  operator: ["<-" "=" "<<-"]
  rhs: (call
    function: (identifier) @_ctor
    (#any-of? @_ctor "R6Class" "setRefClass"))) @definition.class

(call
  function: (identifier) @_ctor
  (#any-of? @_ctor "R6Class" "setRefClass")
  arguments: (arguments
    (argument
      value: (call
        function: (identifier) @_list
        (#eq? @_list "list")
        arguments: (arguments
          (argument
            name: (identifier) @name
            value: (function_definition)) @definition.function)))))

; S4: setClass("Name", ...), setGeneric("name", ...), setMethod("name", "Class", ...)
(call
  function: (identifier) @_f
  (#any-of? @_f "setClass" "setRefClass")
  arguments: (arguments . (argument value: (string (string_content) @name)))) @definition.class

(call
  function: (identifier) @_f
  (#eq? @_f "setGeneric")
  arguments: (arguments . (argument value: (string (string_content) @name)))) @definition.function

(call
  function: (identifier) @_f
  (#any-of? @_f "setMethod" "setValidity" "setReplaceMethod")
  arguments: (arguments . (argument value: (string (string_content) @name)))) @definition.method

; testthat: test_that("what it does", { ... }) and describe("unit", { ... })
(call
  function: (identifier) @_f
  (#any-of? @_f "test_that" "describe")
  arguments: (arguments . (argument value: (string (string_content) @name)))) @definition.function

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc
