//! `sessionlog completions SHELL` and `sessionlog man`: generated from the clap definitions,
//! so they always match the commands and flags of this binary.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory;

use super::output::human_path;
use super::{Cli, CliResult};

/// Prints the completion script for `shell` on standard output.
pub fn completions(shell: clap_complete::Shell) -> CliResult {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "sessionlog", &mut script);
    write_stdout(&script)
}

/// Prints the manual page (every command in one page) on standard output, or writes
/// `sessionlog.1` and one `sessionlog-COMMAND.1` page per command into `out_dir`.
pub fn man(out_dir: Option<&Path>) -> CliResult {
    let command = Cli::command();
    match out_dir {
        None => {
            let mut page = Vec::new();
            render_all(&command, &mut page)?;
            write_stdout(&page)
        }
        Some(dir) => {
            if dir.exists() && !dir.is_dir() {
                return Err(format!(
                    "{} is a file; pass a directory to --out-dir (it is created if missing)",
                    human_path(dir)
                )
                .into());
            }
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("creating {} failed: {e}", human_path(dir)))?;
            clap_mangen::generate_to(command, dir).map_err(|e| {
                format!(
                    "writing the manual pages into {} failed: {e}",
                    human_path(dir)
                )
            })?;
            crate::say!(
                "wrote the manual pages into {}; read one with `man -l {}`",
                human_path(dir),
                human_path(&dir.join("sessionlog.1"))
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The main page followed by one section per visible command: its synopsis, description and
/// options.
fn render_all(command: &clap::Command, out: &mut Vec<u8>) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(command.clone());
    man.render(out)?;
    let commands: Vec<&clap::Command> = command
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .collect();
    if commands.is_empty() {
        return Ok(());
    }
    for sub in commands {
        let name = sub.get_name().to_owned();
        let man = clap_mangen::Man::new(sub.clone().bin_name(format!("sessionlog {name}")));
        let mut section = Vec::new();
        man.render_synopsis_section(&mut section)?;
        man.render_description_section(&mut section)?;
        man.render_options_section(&mut section)?;
        // One section per command; its parts become subsections.
        writeln!(out, ".SH \"SESSIONLOG {}\"", name.to_uppercase())?;
        for line in String::from_utf8_lossy(&section).lines() {
            match line.strip_prefix(".SH ") {
                Some(heading) => writeln!(out, ".SS {heading}")?,
                None => writeln!(out, "{line}")?,
            }
        }
    }
    Ok(())
}

fn write_stdout(bytes: &[u8]) -> CliResult {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(super::output::stdout_error)?;
    Ok(ExitCode::SUCCESS)
}
