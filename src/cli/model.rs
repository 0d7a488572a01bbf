//! `ken model fetch|path|list`: the built-in embedding models.

use anyhow::Result;

use super::args::ModelCommand;
use crate::embed::model;

/// `ken model ...`; `path` exits 1 when the model is not there.
pub(super) fn model(what: ModelCommand) -> Result<i32> {
    let spec = |name: Option<String>| match name {
        Some(name) => model::named(&name),
        None => model::chosen(),
    };
    match what {
        ModelCommand::Fetch { model: name } => {
            let spec = spec(name)?;
            let dir = model::fetch(spec)?;
            println!("{} is ready in {}", spec.name, dir.display());
        }
        ModelCommand::List => {
            let chosen = model::chosen()?;
            let own = (!model::BUILTIN.iter().any(|spec| spec.name == chosen.name)).then_some(chosen);
            for spec in model::BUILTIN.into_iter().chain(own) {
                let mark = if spec.name == chosen.name { "*" } else { " " };
                let state = match model::locate(spec) {
                    Ok(dir) => format!("in {}", dir.display()),
                    Err(_) => "not fetched".to_string(),
                };
                println!("{mark} {:<20} {}  {state}", spec.name, spec.summary);
            }
        }
        ModelCommand::Path { model: name } => match model::locate(spec(name)?) {
            Ok(dir) => println!("{}", dir.display()),
            Err(e) => {
                eprintln!("ken: {e:#}");
                return Ok(1);
            }
        },
    }
    Ok(0)
}
