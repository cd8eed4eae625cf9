from distprompt.cli import run

if __name__ == "__main__":  # a spawned worker imports this module again: it must not run
    run()
