"""`nvrx-hpc serve`: run the attribution service (reports, node history, drain advice)."""

from __future__ import annotations

from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
        port: Annotated[int | None, typer.Option(help="Port to bind (default 8731).")] = None,
        db: Annotated[str | None, typer.Option(help="SQLite database file.")] = None,
        token_file: Annotated[str | None, typer.Option(help="File whose first line is the service token.")] = None,
    ) -> None:
        """Serve attribution reports over HTTP with token auth: submit, fetch, node history, drain advice."""
        from nvrx_hpc.attribution.service import serve as run_service
        from nvrx_hpc.attribution.settings import load_settings

        settings = load_settings(
            overrides={"serve_host": host, "serve_port": port, "serve_db": db, "service_token_file": token_file}
        )
        where = f"http://{settings.serve_host}:{settings.serve_port} (db {settings.serve_db})"
        typer.echo(f"nvrx-hpc serve: {where}", err=True)
        run_service(settings, host=settings.serve_host, port=settings.serve_port, db=settings.serve_db)
