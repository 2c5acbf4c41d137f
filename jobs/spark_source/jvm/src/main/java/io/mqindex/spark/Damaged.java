package io.mqindex.spark;

/**
 * The error of input that does not decode, naming the object and the byte position where the check failed. A
 * JDK exception class: a driver that got this jar by ADD JAR cannot deserialize a task's exception of a class
 * of its own (Spark then reports only "UnknownReason"), so the message must travel in a class every JVM has.
 */
final class Damaged {
    private Damaged() {
    }

    static IllegalStateException error(String object, long position, String detail) {
        return new IllegalStateException(message(object, position, detail));
    }

    static IllegalStateException error(String object, long position, String detail, Throwable cause) {
        return new IllegalStateException(message(object, position, detail), cause);
    }

    private static String message(String object, long position, String detail) {
        return "mqindex: damaged object " + object + " at byte " + position + ": " + detail;
    }
}
