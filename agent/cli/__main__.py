from nvwatch.agent.cli import main

main()
