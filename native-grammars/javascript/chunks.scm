; Chunk definitions for JavaScript and JSX (tags.scm capture convention).

(export_statement declaration: (function_declaration name: (identifier) @name)) @definition.function
(export_statement declaration: (generator_function_declaration name: (identifier) @name)) @definition.function
(export_statement declaration: (class_declaration name: (identifier) @name)) @definition.class
(export_statement declaration: (lexical_declaration
  (variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression)]))) @definition.function
; A function exported as the module's default (`export default (config) => {...}`):
; named `default`, as importers know it.
(export_statement "default" @name value: [(arrow_function) (function_expression)]) @definition.function

(function_declaration name: (identifier) @name) @definition.function
(generator_function_declaration name: (identifier) @name) @definition.function
(class_declaration name: (identifier) @name) @definition.class
(method_definition name: (_) @name) @definition.method

(program (lexical_declaration
  (variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression)])) @definition.function)
(program (variable_declaration
  (variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression)])) @definition.function)

; A CommonJS module's one export (`module.exports = function parseCookies(...)`)
; is named by its function; unnamed, it is `exports`, which a question names
; by the file, as it does a default export.
(program (expression_statement (assignment_expression
  left: (member_expression object: (identifier) @_module property: (property_identifier) @_exports)
  right: (function_expression name: (identifier) @name))) @definition.function
  (#eq? @_module "module")
  (#eq? @_exports "exports"))
(program (expression_statement (assignment_expression
  left: (member_expression property: (property_identifier) @name)
  right: [(arrow_function) (function_expression)])) @definition.function)
; Aliases assigned together (`res.set =\nres.header = function header(...)`):
; named by the first.
(program (expression_statement (assignment_expression
  left: (member_expression property: (property_identifier) @name)
  right: (assignment_expression right: [(arrow_function) (function_expression)]))) @definition.function)

; A function a call wraps (`forwardRef((props, ref) => ...)`, `memo(function
; Row() {...})`, a factory's `$constructor("Name", (inst, def) => {...})`) is
; the function of the constant it is assigned to.
(export_statement declaration: (lexical_declaration
  (variable_declarator name: (identifier) @name
    value: (call_expression arguments: (arguments [(arrow_function) (function_expression)]))))) @definition.function
(program (lexical_declaration
  (variable_declarator name: (identifier) @name
    value: (call_expression arguments: (arguments [(arrow_function) (function_expression)])))) @definition.function)

; Tests (Jest, Vitest, Mocha): `describe("...", () => {...})` groups
; `it("...", ...)` and `test("...", ...)` cases, each named by its title (as
; ExUnit's are), `.only`, `.skip` and `.each(...)` forms included.
(expression_statement (call_expression
  function: [(identifier) @_fn (member_expression object: (identifier) @_fn)]
  arguments: (arguments . [(string (string_fragment) @name) (template_string) @name] . [(arrow_function) (function_expression)]))
  (#eq? @_fn "describe")) @definition.module
(expression_statement (call_expression
  function: [(identifier) @_fn (member_expression object: (identifier) @_fn)]
  arguments: (arguments . [(string (string_fragment) @name) (template_string) @name] . [(arrow_function) (function_expression)]))
  (#any-of? @_fn "it" "test")) @definition.function
(expression_statement (call_expression
  function: (call_expression function: (member_expression object: (identifier) @_fn))
  arguments: (arguments . [(string (string_fragment) @name) (template_string) @name] . [(arrow_function) (function_expression)]))
  (#any-of? @_fn "describe" "it" "test")) @definition.function

; After the tests (named by their titles), a named function a top-level call
; is given (`defineGetter(req, 'protocol', function protocol() {...})`,
; `app.get('/', function index(req, res) {...})`) is defined by its name.
(program (expression_statement (call_expression
  arguments: (arguments (function_expression name: (identifier) @name)))) @definition.function)
; An unnamed one is named by the string right before it (`defineGetter(req,
; 'fresh', function() {...})`, `app.get('/users', (req, res) => {...})`), but
; for a listener: an event's name (`click`) is not its handler's.
(program (expression_statement (call_expression
  function: [(identifier) @_fn (member_expression property: (property_identifier) @_fn)]
  arguments: (arguments (string (string_fragment) @name) . [(arrow_function) (function_expression)]))) @definition.function
  (#not-any-of? @_fn "on" "once" "off" "addEventListener" "addListener" "prependListener" "removeListener" "emit" "accept" "dispose" "then"))

; Functions an object literal's properties hold (`onProgress: (e) => {...}`,
; `transformRequest: [function transformRequest(data) {...}]`) are its methods;
; inside a function they stay in its chunk.
(pair key: (property_identifier) @name value: [(arrow_function) (function_expression)]) @definition.method
(pair key: (property_identifier) @name value: (array [(arrow_function) (function_expression)])) @definition.method

; Class fields holding functions (`handle = () => {}`) are methods.
(field_definition property: (_) @name value: [(arrow_function) (function_expression)]) @definition.method

; Top-level constants and variables that hold no function (those are
; functions above; on a tie the earlier pattern names the definition), named
; by their first declarator; a `require(...)` is an import, not a definition.
(program (lexical_declaration
  (variable_declarator name: (identifier) @name value: (_) @_value)) @definition.constant
  (#not-match? @_value "^require\\("))
(program (variable_declaration
  (variable_declarator name: (identifier) @name value: (_) @_value)) @definition.constant
  (#not-match? @_value "^require\\("))
(export_statement declaration: (lexical_declaration
  (variable_declarator name: (identifier) @name))) @definition.constant
; A CommonJS export of a value (`exports.etag = createETagGenerator(...)`).
(program (expression_statement (assignment_expression
  left: (member_expression object: (identifier) @_exports property: (property_identifier) @name)
  right: (_) @_value)) @definition.constant
  (#eq? @_exports "exports")
  (#not-match? @_value "^require\\("))

; Doc comments (`@doc`), in the tags.scm convention `(comment)* @doc .
; (definition)`: a comment is the doc of the definition it lies directly
; above (no blank line between; attributes and decorators may come between).
; Plain queries have no `#select-adjacent!`: the chunker checks the adjacency.
(comment) @doc
