/**
 * The type algebra of typed views: fixed-length tuples and small rank arithmetic on literal
 * numbers (what `TypedView`'s methods compute their ranks with).
 * @module
 */

/** A fixed-length tuple type (`Tuple<number, 2>` is `[number, number]`). */
export type Tuple<T, N extends number> = number extends N ? T[] : BuildTuple<T, N, []>;
/** Builds {@link Tuple} one element at a time. */
export type BuildTuple<T, N extends number, R extends T[]> = R["length"] extends N ? R : BuildTuple<T, N, [...R, T]>;

/** `N - K` for small literal ranks (number when either is not a literal, or when `K` exceeds `N`:
 * never there would make every type built on the rank, `Tuple<number, never>` first, recurse
 * without end). */
export type Minus<N extends number, K extends number> = number extends N ? number
  : number extends K ? number
  : Tuple<unknown, N> extends [...Tuple<unknown, K>, ...infer R] ? R["length"] extends infer L extends number ? L
    : number
  : number;
/** `N + 1` for literal ranks. */
export type Plus1<N extends number> = number extends N ? number
  : [...Tuple<unknown, N>, unknown]["length"] extends infer L extends number ? L
  : number;
/** `T` nested `N` arrays deep (what `toNested()` returns). */
export type Nested<T, N extends number> = number extends N ? unknown
  : N extends 0 ? T
  : Nested<T, Minus<N, 1>>[];

/** Whether one `slice()` item drops its axis: 1 (an integer, an index string such as `"-1"`), 0
 * (null, a range string, `"..."`, a range object), or "?" when its type does not say (a union
 * gives the union of its members' answers). */
export type SliceDrop<I> = I extends number ? 1
  : I extends null | undefined ? 0
  : I extends "..." ? 0
  : I extends `${string}:${string}` ? 0
  : I extends string ? (string extends I ? "?" : 1)
  : I extends object ? 0
  : "?";
/** The rank of `slice(...items)` on a rank-`N` view: `N` less the axes the items drop (`A` counts
 * them), or number when the rank or an item's type does not say. */
export type SliceRank<N extends number, I extends readonly unknown[], A extends unknown[] = []> = I extends
  readonly [infer H, ...infer R] ? [SliceDrop<H>] extends [1] ? SliceRank<N, R, [...A, unknown]>
  : [SliceDrop<H>] extends [0] ? SliceRank<N, R, A>
  : number
  : I extends readonly [] ? Minus<N, A["length"]>
  : number;
