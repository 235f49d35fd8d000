/**
 * The type algebra of typed views: fixed-length tuples and small rank arithmetic on literal
 * numbers (what `TypedView`'s methods compute their ranks with).
 * @module
 */

/** A fixed-length tuple type (`Tuple<number, 2>` is `[number, number]`). */
export type Tuple<T, N extends number> = number extends N ? T[] : BuildTuple<T, N, []>;
/** Builds {@link Tuple} one element at a time. */
export type BuildTuple<T, N extends number, R extends T[]> = R["length"] extends N ? R : BuildTuple<T, N, [...R, T]>;

/** `N - K` for small literal ranks (number when either is not a literal). */
export type Minus<N extends number, K extends number> = number extends N ? number
  : number extends K ? number
  : Tuple<unknown, N> extends [...Tuple<unknown, K>, ...infer R] ? R["length"] extends infer L extends number ? L
    : number
  : never;
/** `N + 1` for literal ranks. */
export type Plus1<N extends number> = number extends N ? number
  : [...Tuple<unknown, N>, unknown]["length"] extends infer L extends number ? L
  : number;
/** `T` nested `N` arrays deep (what `toNested()` returns). */
export type Nested<T, N extends number> = number extends N ? unknown
  : N extends 0 ? T
  : Nested<T, Minus<N, 1>>[];
