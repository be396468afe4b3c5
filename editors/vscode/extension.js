// Starts `masdsl lsp` (the command is the `masdsl.command` setting) for .mas files.
const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const [command, ...args] = vscode.workspace.getConfiguration("masdsl").get("command", ["masdsl", "lsp"]);
  client = new LanguageClient(
    "masdsl",
    "masdsl language server",
    { command, args, transport: TransportKind.stdio },
    { documentSelector: [{ scheme: "file", language: "mas" }] }
  );
  client.start();
  context.subscriptions.push({ dispose: () => client && client.stop() });
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
