from distprompt.cli import run

run()
