from app.agent.server import main

main()
