// Parses Mermaid diagrams with the same mermaid the site serves; a diagram that does not parse
// fails the documentation build (Material renders Mermaid in the browser, where an error would
// only show as a broken picture).
//
// Input on stdin: JSON [{"id": "...", "text": "..."}]. Output on stdout: JSON
// [{"id": "...", "type": "flowchart-v2"} | {"id": "...", "error": "..."}]. Exit code 0 either
// way; 2 when the input cannot be read.
import { JSDOM } from "jsdom";

// mermaid's parser needs a DOM (DOMPurify); jsdom stands in for the browser's.
const dom = new JSDOM("<!doctype html><html><body></body></html>", { pretendToBeVisual: true });
globalThis.window = dom.window;
globalThis.document = dom.window.document;
for (const name of ["Element", "HTMLElement", "Node", "DOMParser", "MutationObserver", "getComputedStyle"]) {
  if (!(name in globalThis)) globalThis[name] = dom.window[name];
}
const { default: mermaid } = await import("mermaid");
mermaid.initialize({ startOnLoad: false });

let input = "";
for await (const chunk of process.stdin) input += chunk;
let diagrams;
try {
  diagrams = JSON.parse(input);
} catch (error) {
  console.error(`check.mjs: stdin is not JSON: ${error.message}`);
  process.exit(2);
}
const results = [];
for (const { id, text } of diagrams) {
  try {
    const parsed = await mermaid.parse(text);
    results.push({ id, type: parsed.diagramType });
  } catch (error) {
    results.push({ id, error: String(error?.message ?? error) });
  }
}
process.stdout.write(JSON.stringify(results));
