from fleetval.cli import app

app(prog_name="fleetval")
