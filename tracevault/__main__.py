from tracevault.cli import main

main()
