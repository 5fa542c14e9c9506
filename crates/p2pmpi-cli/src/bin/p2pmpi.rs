//! `p2pmpi COMMAND …`: the p2pmpi command-line tool.
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "p2pmpi", version, about = "P2P-MPI in Rust: run MPI programs on computers you do not administer")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an MPI program (same options as `p2pmpirun`).
    #[command(disable_help_flag = true)]
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run { args } => p2pmpi_cli::launcher::main_with_args("p2pmpi run", &args),
    };
    std::process::exit(code);
}
