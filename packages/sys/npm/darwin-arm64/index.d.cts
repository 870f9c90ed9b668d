/** The folder of this platform package's native libraries. */
export declare const libraryDir: string;
/** Its libmlxc, which @mlx/sys loads. */
export declare const libraryPath: string;
