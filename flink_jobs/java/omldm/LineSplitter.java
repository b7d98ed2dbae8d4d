package omldm;

import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.util.Collector;

/**
 * Splits the spokes' joined predictions back into one element per prediction.
 *
 * <p>A spoke hands all the predictions of one crossing to the JVM as one string, the
 * predictions' JSON joined by {@code '\n'} (JSON as the spoke writes it never holds a raw
 * newline), instead of one crossing back per prediction. This emits them one by one, in
 * order, so that the predictions topic holds one prediction per Kafka record as before.
 * An empty input emits nothing.
 */
public class LineSplitter implements FlatMapFunction<String, String> {

    private static final long serialVersionUID = 1L;

    @Override
    public void flatMap(String joined, Collector<String> out) {
        int start = 0;
        int n = joined.length();
        while (start < n) {
            int end = joined.indexOf('\n', start);
            if (end < 0) {
                end = n;
            }
            if (end > start) {
                out.collect(joined.substring(start, end));
            }
            start = end + 1;
        }
    }
}
