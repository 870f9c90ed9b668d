// The order onnxruntime's CPU TopK returns its k elements in when sorted = 0 (the spec leaves it
// to the implementation). onnxruntime picks one of three strategies per call, by k and the axis
// length n, and leaves the elements in whatever order that strategy ends with:
//  - k = 1: the first best element;
//  - small k (k < 4, or log2(k) / log2(n) < 0.725): a binary heap of k entries whose root is the
//    weakest kept so far, filled from the end of the heap array backwards with the first k
//    elements, then offered the rest in order; the result is the heap array as it stands;
//  - otherwise: a quickselect of the k-th element over the index array (C++'s nth_element as
//    libstdc++ implements it: introselect with a median-of-three pivot, an unguarded partition,
//    insertion sort below four elements, heap select past the depth limit); the result is the
//    first k entries as the selection leaves them.
// `better(a, b)` is onnxruntime's comparator: a's value beats b's, or they are equal and a comes first.

type Better = (a: number, b: number) => boolean;

/** Sifts heap[i] down a heap of `size` entries whose root is the weakest (better(child, parent) never holds the other way). */
function siftWeakest(heap: number[], i: number, size: number, better: Better): void {
  for (;;) {
    const left = 2 * i + 1;
    const right = left + 1;
    if (right < size) {
      const beatsLeft = better(heap[i], heap[left]);
      if (beatsLeft && better(heap[right], heap[left])) {
        [heap[i], heap[left]] = [heap[left], heap[i]];
        i = left;
      } else if (beatsLeft || better(heap[i], heap[right])) {
        [heap[i], heap[right]] = [heap[right], heap[i]];
        i = right;
      } else return;
    } else if (left < size && better(heap[i], heap[left])) {
      [heap[i], heap[left]] = [heap[left], heap[i]];
      i = left;
    } else return;
  }
}

function heapOrder(n: number, k: number, better: Better, valueBeats: (a: number, b: number) => boolean): number[] {
  const heap = new Array<number>(k);
  let l = 0;
  for (; l < k; l++) {
    heap[k - l - 1] = l;
    siftWeakest(heap, k - l - 1, k, better);
  }
  for (; l < n; l++) {
    // Values only: an equal value comes later, so it never displaces the root.
    if (valueBeats(l, heap[0])) {
      heap[0] = l;
      siftWeakest(heap, 0, k, better);
    }
  }
  return heap;
}

// ---- libstdc++'s nth_element, over an array of indices ----

function moveMedianToFirst(a: number[], result: number, x: number, y: number, z: number, comp: Better): void {
  const swap = (i: number) => ([a[result], a[i]] = [a[i], a[result]]);
  if (comp(a[x], a[y])) {
    if (comp(a[y], a[z])) swap(y);
    else if (comp(a[x], a[z])) swap(z);
    else swap(x);
  } else if (comp(a[x], a[z])) swap(x);
  else if (comp(a[y], a[z])) swap(z);
  else swap(y);
}

function unguardedPartition(a: number[], first: number, last: number, pivot: number, comp: Better): number {
  for (;;) {
    while (comp(a[first], a[pivot])) first++;
    last--;
    while (comp(a[pivot], a[last])) last--;
    if (!(first < last)) return first;
    [a[first], a[last]] = [a[last], a[first]];
    first++;
  }
}

function insertionSort(a: number[], first: number, last: number, comp: Better): void {
  if (first === last) return;
  for (let i = first + 1; i < last; i++) {
    const v = a[i];
    if (comp(v, a[first])) {
      for (let j = i; j > first; j--) a[j] = a[j - 1];
      a[first] = v;
    } else {
      let j = i;
      // (j > first: a comparator that is not a strict weak order, NaN's, must not run off the front)
      while (j > first && comp(v, a[j - 1])) {
        a[j] = a[j - 1];
        j--;
      }
      a[j] = v;
    }
  }
}

/** libstdc++'s __adjust_heap: sifts `value` from `hole` down a heap under comp (its root is one no entry is comp-after). */
function adjustHeap(a: number[], first: number, hole: number, len: number, value: number, comp: Better): void {
  const top = hole;
  let child = hole;
  while (child < Math.floor((len - 1) / 2)) {
    child = 2 * (child + 1);
    if (comp(a[first + child], a[first + child - 1])) child--;
    a[first + hole] = a[first + child];
    hole = child;
  }
  if ((len & 1) === 0 && child === Math.floor((len - 2) / 2)) {
    child = 2 * (child + 1);
    a[first + hole] = a[first + child - 1];
    hole = child - 1;
  }
  // __push_heap
  let parent = Math.trunc((hole - 1) / 2);
  while (hole > top && comp(a[first + parent], value)) {
    a[first + hole] = a[first + parent];
    hole = parent;
    parent = Math.trunc((hole - 1) / 2);
  }
  a[first + hole] = value;
}

function heapSelect(a: number[], first: number, middle: number, last: number, comp: Better): void {
  const len = middle - first;
  if (len >= 2)
    for (let parent = Math.floor((len - 2) / 2); parent >= 0; parent--) adjustHeap(a, first, parent, len, a[first + parent], comp);
  for (let i = middle; i < last; i++) {
    if (comp(a[i], a[first])) {
      const v = a[i];
      a[i] = a[first];
      adjustHeap(a, first, 0, len, v, comp);
    }
  }
}

function nthElement(a: number[], nth: number, comp: Better): void {
  let first = 0;
  let last = a.length;
  if (first === last || nth === last) return;
  let depth = 2 * Math.floor(Math.log2(last - first));
  while (last - first > 3) {
    if (depth === 0) {
      heapSelect(a, first, nth + 1, last, comp);
      [a[first], a[nth]] = [a[nth], a[first]];
      return;
    }
    depth--;
    const mid = first + Math.floor((last - first) / 2);
    moveMedianToFirst(a, first, first + 1, mid, last - 1, comp);
    const cut = unguardedPartition(a, first + 1, last, first, comp);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  insertionSort(a, first, last, comp);
}

/**
 * The positions (0..n-1 along the axis) of one row's top k elements, in the order onnxruntime's
 * CPU kernel returns them with sorted = 0. `values` is the row; `largest` picks the largest.
 */
export function onnxruntimeUnsortedTopK(values: ArrayLike<number | bigint>, k: number, largest: boolean): number[] {
  const n = values.length;
  if (k === 0) return [];
  const valueBeats = largest ? (a: number, b: number) => values[a] > values[b] : (a: number, b: number) => values[a] < values[b];
  const better: Better = (a, b) => valueBeats(a, b) || (values[a] === values[b] && a < b);
  if (k === 1) {
    let best = 0;
    for (let l = 1; l < n; l++) if (valueBeats(l, best)) best = l;
    return [best];
  }
  if (k < 4 || Math.log2(k) / Math.log2(n) < 0.725) return heapOrder(n, k, better, valueBeats);
  const order = Array.from({ length: n }, (_, i) => i);
  nthElement(order, k - 1, better);
  return order.slice(0, k);
}
