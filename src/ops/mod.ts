/**
 * Loads every operation on views. Each module registers the `BufferView` methods it implements
 * (`src/view/hooks.ts`) as it loads; the entries import this before they hand out any view.
 * @module
 */
import "./copy.ts";
import "./export.ts";
import "./requirements.ts";
import "./view_ops.ts";
