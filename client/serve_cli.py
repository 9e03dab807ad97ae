"""``solver-cli serve``: the gRPC planning service (server/app.py) with its options, and the plan explorer beside
it with ``--ui`` (client/cli.py registers it). The server's modules are imported inside the command, so the CLI's
other commands start without grpcio (tests/client/test_cli_startup.py)."""

from __future__ import annotations

import typer

from parplan.client.cli_errors import EXIT_BAD_INPUT, fail, one_line_errors, require_extra


def serve_command(
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (0.0.0.0: every interface)"),
    port: int = typer.Option(50051, "--port", min=0, max=65535, help="TCP port (0: any free port)"),
    health_port: int = typer.Option(50052, "--health-port", min=0, max=65535, help="TCP port of the health-only "
                                    "server (plaintext, no token: the kubelet's grpc probe; 0: any free port)"),
    max_concurrent: int = typer.Option(4, "--max-concurrent", min=1, help="solving calls at once; more wait "
                                       "for a slot (up to their deadline) in the queue"),
    max_queue: int = typer.Option(64, "--max-queue", min=0, help="calls that may wait for a solver slot; "
                                  "more get RESOURCE_EXHAUSTED at once"),
    idle_timeout: float = typer.Option(10.0, "--idle-timeout", min=0.001, help="seconds a call may go without "
                                       "sending its request (or a reflection stream idle) before it is cancelled"),
    hf_config_dir: str = typer.Option(None, "--hf-config-dir", metavar="DIR", help="the only folder whose "
                                      "config.json files a request's model.hf_config may name (default: none; "
                                      "send model.hf_config_json instead)"),
    tls_cert: str = typer.Option(None, "--tls-cert", metavar="PEM", help="TLS certificate chain (with --tls-key)"),
    tls_key: str = typer.Option(None, "--tls-key", metavar="PEM", help="TLS private key"),
    auth_token_file: str = typer.Option(None, "--auth-token-file", metavar="FILE", help="require "
                                        "'authorization: Bearer <token>' (the file's content) on every call"),
    grace_period: float = typer.Option(10.0, "--grace-period", min=0, help="seconds in-flight calls get to "
                                       "finish after SIGTERM (1 s before the end, solves answer with their best "
                                       "plan so far); the process exits by the grace + 0.5 s"),
    memory_budget_mib: int = typer.Option(None, "--memory-budget-mib", help="resident memory the server's solves "
                                          "may grow the process to, MiB (256 to 4194304; default 1536): keep it "
                                          "below the container's memory limit"),
    sweep_engine: str = typer.Option("local", "--sweep-engine", help="where the Sweep RPC solves its points: "
                                     "local (worker processes) or ray (a Ray runtime on the server)"),
    ui_port: int = typer.Option(None, "--ui", min=0, max=65535, metavar="PORT", help="also serve the plan "
                                "explorer (solver-cli ui) on 127.0.0.1:PORT (needs the optional 'ui' extra)"),
) -> None:
    """Run the gRPC planning service (parplan.v1.PlannerService, health, reflection) until SIGTERM."""
    with one_line_errors():
        require_extra("server", "solver-cli serve")
        if ui_port is not None:  # the explorer beside the service, in a daemon thread of this process
            require_extra("ui", "solver-cli serve --ui")
            from parplan.client.ui.runner import start_in_thread

            typer.echo(f"plan explorer on {start_in_thread('127.0.0.1', ui_port)[1]}", err=True)
        if memory_budget_mib is not None:  # the process default of every call's SolverControls.memory_budget_mib
            from parplan.solver.deadline import set_default_memory_budget

            set_default_memory_budget(memory_budget_mib)
        from parplan.server.app import ServeConfigError, ServeOptions, serve as run_server

        try:
            run_server(ServeOptions(host=host, port=port, max_concurrent=max_concurrent, tls_cert=tls_cert,
                                    tls_key=tls_key, auth_token_file=auth_token_file, grace_s=grace_period,
                                    max_queue=max_queue, idle_timeout_s=idle_timeout, hf_config_dir=hf_config_dir,
                                    health_port=health_port, sweep_engine=sweep_engine))
        except ServeConfigError as err:
            fail(str(err), EXIT_BAD_INPUT)
